"""`python -m kevolve task=NAME ...`: one search (`kevolve.cli.search`)."""
from kevolve.cli.search import cli

if __name__ == "__main__":
    cli()
