"""Reports for people: `tables` formats evaluations and a search's summary for the terminal."""
