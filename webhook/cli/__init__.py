"""The `gpu-webhook` command line: thin shells over `webhook.admission`."""
