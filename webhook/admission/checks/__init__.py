"""The cluster checks: which nodes are a policy's, whether a pod fits them, and the policy's drift from them.
Above DRA, whose claims they count; below the engine that runs them."""
