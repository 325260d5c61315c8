"""Digits: one decision tree on the raw pixels."""

import pandas as pd
from sklearn.tree import DecisionTreeClassifier

MAX_DEPTH = 8
SEED = 0

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
pixels = [c for c in train.columns if c.startswith("pixel")]
model = DecisionTreeClassifier(max_depth=MAX_DEPTH, random_state=SEED)
model.fit(train[pixels], train["label"])
sub = pd.DataFrame({"id": test["id"], "label": model.predict(test[pixels])})
sub.to_csv("submission.csv", index=False)
