"""Extra report sections: a module NAME here with ``render(records, out) -> str`` is used by a
suite that lists NAME under ``[report] extras``."""
