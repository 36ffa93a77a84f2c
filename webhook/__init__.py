"""gpu-admission: a Kubernetes admission webhook that makes GPU requests correct, fair and safe."""

__version__ = "0.1.0"
