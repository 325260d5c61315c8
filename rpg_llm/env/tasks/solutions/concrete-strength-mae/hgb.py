"""Concrete strength: histogram gradient boosting with an absolute-error loss."""

import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor

MAX_ITER = 300
LEARNING_RATE = 0.1

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
features = [c for c in train.columns if c not in ("id", "compressive_strength")]
model = HistGradientBoostingRegressor(
    loss="absolute_error",
    max_iter=MAX_ITER,
    learning_rate=LEARNING_RATE,
    early_stopping=False,
    random_state=0,
)
model.fit(train[features], train["compressive_strength"])
pred = model.predict(test[features])
pd.DataFrame({"id": test["id"], "compressive_strength": pred}).to_csv("submission.csv", index=False)
