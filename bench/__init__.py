"""The benchmark runner, suites, reports, protocol demos and the ``securevfl`` CLI."""
