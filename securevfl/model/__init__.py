"""A trained model's use: save and load it (``files``, ``layers``), predict with it
(``predict``, its head and rows ``predict_head``, ``predict_rows``, one networked party
``predict_party``, its privacy record ``predict_privacy``, PBM-VFL's ``predict_pbm``, SecureBoost's
routed scoring ``predict_trees``), score it (``evaluation``) and checkpoint a run
(``checkpoint``, ``checkpoint_privacy``).

The package imports nothing itself: the training core imports ``checkpoint`` and ``evaluation``
without loading the prediction code, and a party process only what its run uses. The public
names (``Model``, ``Prediction``, ``load_model``) are re-exported by ``securevfl``.
"""
