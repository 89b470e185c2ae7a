"""securevfl: privacy-preserving vertical federated learning, DP, MPC and HE side by side."""

__version__ = "0.1.0"
