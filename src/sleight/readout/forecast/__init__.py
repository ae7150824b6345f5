"""Reader forecasts: does the forecast at the scored position rank the reader's correctness?"""
