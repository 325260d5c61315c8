"""Leaf species: random forest on the raw features (categoricals one-hot)."""

import pandas as pd
from sklearn.ensemble import RandomForestClassifier

N_ESTIMATORS = 100
SEED = 0

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
features = [c for c in train.columns if c not in ("id", "species")]
both = pd.get_dummies(pd.concat([train[features], test[features]]), dtype=float)
x_train, x_test = both.iloc[: len(train)], both.iloc[len(train) :]
model = RandomForestClassifier(n_estimators=N_ESTIMATORS, random_state=SEED, n_jobs=1)
model.fit(x_train, train["species"])
sub = pd.DataFrame(model.predict_proba(x_test), columns=model.classes_)
sub.insert(0, "id", test["id"].to_numpy())
sub.to_csv("submission.csv", index=False)
