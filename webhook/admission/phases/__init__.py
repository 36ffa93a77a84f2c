"""The admission phases: mutate (conversion, steering, env hints, engine flags, the re-apply record) and
validate. Each reads the policy and the sharing backends below it."""
