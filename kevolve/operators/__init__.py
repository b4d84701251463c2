"""Operators: a proposal in, a kernel source out (a `Mutation`). Pure: no Ray, no network of their own.

- `knobs`, `knob`: the knob syntax and the knob operator (it needs no LLM).
- LLM operators: `context` (the facts every prompt states, never a held-out configuration), `template` and
  `prompts/*.md` (the prompt files), `compose` (a `Request` → chat messages per operator), `parse` (a reply →
  a kernel or the reason there is none), `strategies` (meta-generation's strategies and their scores),
  `llm_operator` (`apply`: a reply → a Mutation; `LLMOperator`: the call), `choice` (operator × model: weights or
  a bandit).
- LLM verifiers: `verifiers` (prompts, verdict parsing, `LLMVerifier`), `screening` (aggregation, filter /
  shadow / audit decisions, `VerifierStats`).
"""
