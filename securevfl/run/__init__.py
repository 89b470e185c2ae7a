"""The steps of one run, composed by :func:`securevfl.experiment.run_experiment`: the checks
before any data (``checks``), each party opens its own data and the parties exchange public
metadata and align rows (``open_data``), the label holder draws the split and the views are built
(``steps``, ``centring``, ``views``), the parties' records with their keys and model parts
(``parties``), the steps around training (``phases``, ``train``), ``--processes`` (``processes``);
after training the label holder builds the result record (``record``) and judges the outcome
(``outcome``: warnings for a result that looks fine but is not). The package imports nothing
itself.
"""
