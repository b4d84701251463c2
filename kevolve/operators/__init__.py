"""Operators: a proposal in, a kernel source out (a `Mutation`). Pure: no Ray, no network of their own.
`knobs` is the knob syntax; `knob` the operator that turns and crosses knobs (it needs no LLM)."""
