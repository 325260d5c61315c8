"""Concrete strength: random forest regression."""

import pandas as pd
from sklearn.ensemble import RandomForestRegressor

N_ESTIMATORS = 100
SEED = 0

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
features = [c for c in train.columns if c not in ("id", "compressive_strength")]
model = RandomForestRegressor(n_estimators=N_ESTIMATORS, random_state=SEED, n_jobs=1)
model.fit(train[features], train["compressive_strength"])
pred = model.predict(test[features])
pd.DataFrame({"id": test["id"], "compressive_strength": pred}).to_csv("submission.csv", index=False)
