"""The namespace policies as the API server's own admission policies (MutatingAdmissionPolicy and
ValidatingAdmissionPolicy, CEL): what CEL can carry, compiled from the engine's tables and sentences
(docs/native-policies.md). Pure: the CLI prints what `compile.compile_native` returns."""
