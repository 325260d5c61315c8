"""Ames housing: histogram gradient boosting on log price."""

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.preprocessing import OrdinalEncoder

MAX_ITER = 200
LEARNING_RATE = 0.1

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
features = [c for c in train.columns if c not in ("id", "Sale_Price")]
categorical = list(train[features].select_dtypes(exclude="number").columns)
encoder = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1)
x_train = train[features].copy()
x_test = test[features].copy()
x_train[categorical] = encoder.fit_transform(x_train[categorical].fillna("missing"))
x_test[categorical] = encoder.transform(x_test[categorical].fillna("missing"))
model = HistGradientBoostingRegressor(
    max_iter=MAX_ITER, learning_rate=LEARNING_RATE, early_stopping=False, random_state=0
)
model.fit(x_train, np.log(train["Sale_Price"]))
pred = np.exp(model.predict(x_test))
pd.DataFrame({"id": test["id"], "Sale_Price": pred}).to_csv("submission.csv", index=False)
