"""Telecom churn: random forest, categoricals ordinal-encoded."""

import pandas as pd
from sklearn.ensemble import RandomForestClassifier
from sklearn.preprocessing import OrdinalEncoder

N_ESTIMATORS = 100
SEED = 0

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
features = [c for c in train.columns if c not in ("id", "churn")]
categorical = list(train[features].select_dtypes(exclude="number").columns)
encoder = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1)
x_train, x_test = train[features].copy(), test[features].copy()
x_train[categorical] = encoder.fit_transform(x_train[categorical])
x_test[categorical] = encoder.transform(x_test[categorical])
model = RandomForestClassifier(
    n_estimators=N_ESTIMATORS, min_samples_leaf=2, random_state=SEED, n_jobs=1
)
model.fit(x_train, train["churn"])
proba = model.predict_proba(x_test)[:, 1]
pd.DataFrame({"id": test["id"], "churn": proba}).to_csv("submission.csv", index=False)
