"""Dynamic Resource Allocation as a source of devices: claims and templates judged by the policy, and a pod's
claims counted with its GPUs. Above the phases, whose rules it reuses."""
