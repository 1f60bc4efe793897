"""Predict a collective over message sizes: place, plan, build, simulate, and keep the
fastest choice per size (the library behind ``simcoll predict``)."""

from simcoll.prediction.pipeline import Prediction, predict

__all__ = ["Prediction", "predict"]
