"""Digits: random forest on the raw pixels."""

import pandas as pd
from sklearn.ensemble import RandomForestClassifier

N_ESTIMATORS = 100
SEED = 0

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
pixels = [c for c in train.columns if c.startswith("pixel")]
model = RandomForestClassifier(n_estimators=N_ESTIMATORS, random_state=SEED, n_jobs=1)
model.fit(train[pixels], train["label"])
sub = pd.DataFrame({"id": test["id"], "label": model.predict(test[pixels])})
sub.to_csv("submission.csv", index=False)
