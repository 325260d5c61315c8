"""Digits: Gaussian naive Bayes on the 64 pixel intensities."""

import pandas as pd
from sklearn.naive_bayes import GaussianNB

VAR_SMOOTHING = 1e-9

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
pixels = [c for c in train.columns if c.startswith("pixel")]
model = GaussianNB(var_smoothing=VAR_SMOOTHING).fit(train[pixels], train["label"])
sub = pd.DataFrame({"id": test["id"], "label": model.predict(test[pixels])})
sub.to_csv("submission.csv", index=False)
