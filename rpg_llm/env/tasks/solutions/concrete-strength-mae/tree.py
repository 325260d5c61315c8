"""Concrete strength: one regression tree."""

import pandas as pd
from sklearn.tree import DecisionTreeRegressor

MAX_DEPTH = 6
SEED = 0

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
features = [c for c in train.columns if c not in ("id", "compressive_strength")]
model = DecisionTreeRegressor(max_depth=MAX_DEPTH, random_state=SEED)
model.fit(train[features], train["compressive_strength"])
pred = model.predict(test[features])
pd.DataFrame({"id": test["id"], "compressive_strength": pred}).to_csv("submission.csv", index=False)
