"""GPU budgets (docs/budgets.md): what a pod holds in GPU-equivalents, the rule that judges it, the offline
tally and the schedulers' configurations rendered from the same weights. Above DRA and the checks (a pod's
claims count), below the engine that calls the rule; each form's weight is its backend's (sharing/) or DRA's."""
