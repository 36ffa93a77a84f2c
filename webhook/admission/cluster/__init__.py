"""The cluster view: the nodes' snapshot, DRA's slices and classes merged into it, CEL device selectors, the
GPU entries of the namespaces' ResourceQuotas (quota.py). Pure data the server's watches and the CLI's lists
build; above base/ and policy/."""
