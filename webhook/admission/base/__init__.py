"""The core's vocabulary, the lowest layer: quantities, resource names, violations and refusals, memos,
JSON patches, GPU config strategies and the paths of a pod spec. It imports nothing else of the core."""
