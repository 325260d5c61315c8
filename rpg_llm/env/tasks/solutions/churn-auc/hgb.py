"""Telecom churn: histogram gradient boosting, categoricals ordinal-encoded."""

import pandas as pd
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.preprocessing import OrdinalEncoder

MAX_ITER = 200
LEARNING_RATE = 0.05

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
features = [c for c in train.columns if c not in ("id", "churn")]
categorical = list(train[features].select_dtypes(exclude="number").columns)
encoder = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1)
x_train, x_test = train[features].copy(), test[features].copy()
x_train[categorical] = encoder.fit_transform(x_train[categorical])
x_test[categorical] = encoder.transform(x_test[categorical])
model = HistGradientBoostingClassifier(
    max_iter=MAX_ITER, learning_rate=LEARNING_RATE, early_stopping=False, random_state=0
)
model.fit(x_train, train["churn"])
proba = model.predict_proba(x_test)[:, 1]
pd.DataFrame({"id": test["id"], "churn": proba}).to_csv("submission.csv", index=False)
