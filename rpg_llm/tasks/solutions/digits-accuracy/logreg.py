"""Digits: multinomial logistic regression on pixels scaled to [0, 1]."""

import pandas as pd
from sklearn.linear_model import LogisticRegression

C = 1.0

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
pixels = [c for c in train.columns if c.startswith("pixel")]
model = LogisticRegression(C=C, max_iter=2000).fit(train[pixels] / 16.0, train["label"])
sub = pd.DataFrame({"id": test["id"], "label": model.predict(test[pixels] / 16.0)})
sub.to_csv("submission.csv", index=False)
