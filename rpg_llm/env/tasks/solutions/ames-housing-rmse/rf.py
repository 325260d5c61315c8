"""Ames housing: random forest on log price with ordinal-encoded categoricals."""

import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestRegressor
from sklearn.preprocessing import OrdinalEncoder

N_ESTIMATORS = 50
SEED = 0

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
features = [c for c in train.columns if c not in ("id", "Sale_Price")]
categorical = list(train[features].select_dtypes(exclude="number").columns)
encoder = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1)
x_train = train[features].copy()
x_test = test[features].copy()
x_train[categorical] = encoder.fit_transform(x_train[categorical].fillna("missing"))
x_test[categorical] = encoder.transform(x_test[categorical].fillna("missing"))
model = RandomForestRegressor(
    n_estimators=N_ESTIMATORS, max_features=0.3, random_state=SEED, n_jobs=1
)
model.fit(x_train.fillna(-1), np.log(train["Sale_Price"]))
pred = np.exp(model.predict(x_test.fillna(-1)))
pd.DataFrame({"id": test["id"], "Sale_Price": pred}).to_csv("submission.csv", index=False)
