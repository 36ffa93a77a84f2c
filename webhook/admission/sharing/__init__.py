"""The sharing backends: what each `sharing.mode` serves, converts, requires of nodes and checks. The
admission phases above ask the backend; nothing below knows a backend."""
