"""The steps of one run, composed by :func:`securevfl.experiment.run_experiment`: each party
opens its own data, the parties exchange public metadata and align rows, the label holder
draws the split (``steps``); after training the label holder builds the result record
(``record``) and judges the outcome (``outcome``: warnings for a result that looks fine but
is not). The package imports nothing itself.
"""
