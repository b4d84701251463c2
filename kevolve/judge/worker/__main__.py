"""`python -m kevolve.judge.worker`: the worker process (`serve.main`), as the evaluator starts it."""
from kevolve.judge.worker.serve import main

if __name__ == "__main__":
    main()
