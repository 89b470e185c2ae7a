"""Cryptography only: Shamir/MPyC products, the wire (bounded typed decoding, mutual TLS, run
handshake, test certificates), pairwise-mask secure aggregation, CKKS, Paillier.

Nothing here imports ``securevfl``, ``baselines`` or ``bench``: a protocol takes arrays/bytes and
a small transport it is handed, and can be tested alone.
"""
