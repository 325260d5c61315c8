"""Concrete strength: k nearest neighbours on scaled features."""

import pandas as pd
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

K = 5
WEIGHTS = "distance"  # or "uniform"

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
features = [c for c in train.columns if c not in ("id", "compressive_strength")]
model = make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=K, weights=WEIGHTS))
model.fit(train[features], train["compressive_strength"])
pred = model.predict(test[features])
pd.DataFrame({"id": test["id"], "compressive_strength": pred}).to_csv("submission.csv", index=False)
