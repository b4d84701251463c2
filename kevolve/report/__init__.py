"""Reports for people: `tables` formats evaluations and a search's summary for the terminal; `data`, `figures`,
`html` and `python -m kevolve.report` (`__main__`) make the HTML report of one run or several from their stores."""
