"""Leaf species: k nearest neighbours on scaled shape / texture features."""

import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

K = 10
WEIGHTS = "distance"  # or "uniform"

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
features = [c for c in train.columns if c not in ("id", "species")]
categorical = list(train[features].select_dtypes(exclude="number").columns)
numeric = [c for c in features if c not in categorical]
prep = ColumnTransformer(
    [
        ("num", StandardScaler(), numeric),
        ("cat", OneHotEncoder(handle_unknown="ignore"), categorical),
    ]
)
model = make_pipeline(prep, KNeighborsClassifier(n_neighbors=K, weights=WEIGHTS))
model.fit(train[features], train["species"])
sub = pd.DataFrame(model.predict_proba(test[features]), columns=model.classes_)
sub.insert(0, "id", test["id"])
sub.to_csv("submission.csv", index=False)
