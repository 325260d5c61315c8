"""Digits: k nearest neighbours on the raw pixels."""

import pandas as pd
from sklearn.neighbors import KNeighborsClassifier

K = 3

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
pixels = [c for c in train.columns if c.startswith("pixel")]
model = KNeighborsClassifier(n_neighbors=K).fit(train[pixels], train["label"])
sub = pd.DataFrame({"id": test["id"], "label": model.predict(test[pixels])})
sub.to_csv("submission.csv", index=False)
