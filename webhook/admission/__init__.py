"""The pure admission core: parse, policy lookup, mutate, validate, patch.

Nothing in this package does network or process I/O, and nothing here imports the server or the CLI;
`loader.load_policies` is the one function that reads files. Start at `engine.evaluate`.
"""
