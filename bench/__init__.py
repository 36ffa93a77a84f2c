"""gpu-admission benchmarks: `make bench` (or `python -m bench [NAME ...]`) prints tables and writes JSON.

Numbers depend on the machine; every result file records it (CPU model, cores, Python version).
"""
