"""`python -m kevolve.export RUN_DIR -o DIR`: a run's assembled op (or a task's best/ op) as a small installable torch
package — the kernels' sources built on first import, one `torch.library.custom_op` per task with a fake
implementation and, paired with a backward (`--backward`), autograd; calls routed per size to the kernel proven
fastest there or to torch. `bundle` reads what is exported, `package` writes it, `readme` says what was proven;
`runtime` and `modules` are copied into the package (torch only)."""
