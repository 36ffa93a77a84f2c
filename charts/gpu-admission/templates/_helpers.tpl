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
