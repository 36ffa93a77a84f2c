{{/* The labels every object carries: the same as manifests/base, so both install paths select alike. */}}
{{- define "gpu-admission.labels" -}}
app.kubernetes.io/name: gpu-admission
{{- end }}

{{- define "gpu-admission.webhookLabels" -}}
app.kubernetes.io/name: gpu-admission
app.kubernetes.io/component: webhook
{{- end }}

{{- define "gpu-admission.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The matchConditions expression for one pod-spec location: true when the pod mounts a hostPath under /dev,
names DRA claims or claim templates (spec.resourceClaims: their devices count with its GPUs), or
a container (of the given sections) names a managed GPU resource in its requests or limits, sets
NVIDIA_VISIBLE_DEVICES (by name, or through an envFrom prefix that can make it), or mounts something at the
container toolkit's device-list path. Every step is guarded (has() and `in`), so no object makes it raise an
error, which failurePolicy Fail would turn into a refusal. Called with (list PATH SECTIONS), PATH such as
"object.spec.template.spec".
*/}}
{{- define "gpu-admission.mentionsGpu" -}}
{{- $path := index . 0 -}}
{{- $sections := index . 1 -}}
{{- $steps := splitList "." $path -}}
{{- $guards := list -}}
{{- range $i, $_ := rest $steps -}}
{{- $guards = append $guards (printf "has(%s)" (join "." (slice $steps 0 (add $i 2)))) -}}
{{- end -}}
{{ join " && " $guards }} && (
({{ printf "has(%s.volumes) && %s.volumes != null && %s.volumes.exists(v," $path $path $path }}
  has(v.hostPath) && v.hostPath != null && has(v.hostPath.path) && v.hostPath.path.contains('dev'))) ||
({{ printf "has(%s.resourceClaims) && %s.resourceClaims != null && size(%s.resourceClaims) > 0" $path $path $path }}) ||
{{ $sections }}.exists(section,
  section in {{ $path }} && {{ $path }}[section] != null &&
  {{ $path }}[section].exists(c,
    (has(c.resources) && ['limits', 'requests'].exists(amounts,
      amounts in c.resources && c.resources[amounts] != null &&
      c.resources[amounts].exists(r,
        r in ['nvidia.com/gpu', 'nvidia.com/gpu.shared', 'amd.com/gpu'] ||
        r.startsWith('nvidia.com/mig-') || r.startsWith('gpu.intel.com/') ||
        r.startsWith('deviceclass.resource.kubernetes.io/')))) ||
    (has(c.env) && c.env != null && c.env.exists(e, e.name == 'NVIDIA_VISIBLE_DEVICES')) ||
    (has(c.envFrom) && c.envFrom != null && c.envFrom.exists(f,
      has(f.prefix) && f.prefix != '' && 'NVIDIA_VISIBLE_DEVICES'.startsWith(f.prefix))) ||
    (has(c.volumeMounts) && c.volumeMounts != null && c.volumeMounts.exists(m,
      has(m.mountPath) && m.mountPath.contains('nvidia-container-devices'))))))
{{- end }}

{{/*
The match condition of a DRA claim or claim template: it asks for devices. The argument is the path to its
requests, e.g. "object.spec.devices.requests"; every step is guarded (an error under failurePolicy Fail would
reject the request).
*/}}
{{- define "gpu-admission.asksDevices" -}}
{{- $steps := splitList "." . -}}
{{- $guards := list -}}
{{- range $i, $_ := rest $steps -}}
{{- $guards = append $guards (printf "has(%s)" (join "." (slice $steps 0 (add $i 2)))) -}}
{{- end -}}
{{ join " && " $guards }} &&
{{ . }} != null && size({{ . }}) > 0
{{- end }}

{{/*
The webhooks, one entry per place the pod spec lives (match conditions are ANDed, so each entry's condition
reads a single path): name, rules, pod-spec path and container sections; for DRA claims and claim templates,
the path to their device requests instead.
*/}}
{{- define "gpu-admission.webhookEntries" -}}
- name: pods.gpu-admission.io
  path: object.spec
  sections: "['containers', 'initContainers']"
  rules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods], scope: Namespaced}
- name: ephemeralcontainers.gpu-admission.io
  path: object.spec
  sections: "['ephemeralContainers']"
  rules:
    - {apiGroups: [""], apiVersions: [v1], operations: [UPDATE], resources: [pods/ephemeralcontainers], scope: Namespaced}
- name: workloads.gpu-admission.io
  path: object.spec.template.spec
  sections: "['containers', 'initContainers']"
  rules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments, statefulsets, daemonsets, replicasets], scope: Namespaced}
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [replicationcontrollers], scope: Namespaced}
    - {apiGroups: [batch], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [jobs], scope: Namespaced}
- name: cronjobs.gpu-admission.io
  path: object.spec.jobTemplate.spec.template.spec
  sections: "['containers', 'initContainers']"
  rules:
    - {apiGroups: [batch], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [cronjobs], scope: Namespaced}
- name: podtemplates.gpu-admission.io
  path: object.template.spec
  sections: "['containers', 'initContainers']"
  rules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [podtemplates], scope: Namespaced}
- name: resourceclaims.gpu-admission.io
  requests: object.spec.devices.requests
  rules:
    - {apiGroups: [resource.k8s.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [resourceclaims], scope: Namespaced}
- name: resourceclaimtemplates.gpu-admission.io
  requests: object.spec.spec.devices.requests
  rules:
    - {apiGroups: [resource.k8s.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [resourceclaimtemplates], scope: Namespaced}
{{- end }}
