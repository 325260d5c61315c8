"""Diamond prices: one-hot grades, scaled sizes, log price, one model family picked by MODEL."""

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
from sklearn.linear_model import Ridge
from sklearn.model_selection import cross_val_score
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, StandardScaler
from sklearn.tree import DecisionTreeRegressor

MODEL = "ridge"  # one of "hgb", "knn", "rf", "ridge", "tree"
LOG_SIZE = False  # use log(1 + x) of carat, x, y, z
ALPHA = 1.0  # ridge: L2 penalty
N_ESTIMATORS = 250  # rf: trees
MAX_ITER = 200  # hgb: boosting iterations
LEARNING_RATE = 0.1  # hgb
MAX_DEPTH = None  # tree / rf: depth limit (None: none)
MIN_SAMPLES_LEAF = 5  # rf: smallest leaf (smaller: bigger forests; 1 may not fit in 2 GiB)
K = 10  # knn: neighbours
SUBSAMPLE = 1.0  # fraction of the training rows used
FOLDS = 0  # k-fold cross-validated RMSE printed before the final fit: one of 0, 3, 5 (0: none)
SEED = 0

families = {
    "hgb": lambda: HistGradientBoostingRegressor(
        max_iter=MAX_ITER, learning_rate=LEARNING_RATE, early_stopping=False, random_state=SEED
    ),
    "knn": lambda: KNeighborsRegressor(K),
    "rf": lambda: RandomForestRegressor(
        N_ESTIMATORS, max_depth=MAX_DEPTH, min_samples_leaf=MIN_SAMPLES_LEAF, random_state=SEED
    ),
    "ridge": lambda: Ridge(alpha=ALPHA),
    "tree": lambda: DecisionTreeRegressor(max_depth=MAX_DEPTH, random_state=SEED),
}
if MODEL not in families:
    raise ValueError(f"MODEL {MODEL!r} is not one of {', '.join(map(repr, sorted(families)))}")

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
if SUBSAMPLE < 1.0:
    train = train.sample(frac=SUBSAMPLE, random_state=SEED)
grades = list(train.select_dtypes(exclude="number").columns)  # cut, color, clarity
numeric = [c for c in train.columns if c not in ["id", "price", *grades]]
sizes = [c for c in numeric if c == "carat" or len(c) == 1]  # carat, x, y, z
size_step = FunctionTransformer(np.log1p) if LOG_SIZE else "passthrough"
columns = ColumnTransformer(
    [
        ("size", make_pipeline(size_step, StandardScaler()), sizes),
        ("other", StandardScaler(), [c for c in numeric if c not in sizes]),
        ("grade", OneHotEncoder(handle_unknown="ignore", sparse_output=False), grades),
    ]
)
model = make_pipeline(columns, families[MODEL]())
x_train, y_train = train.drop(columns=["id", "price"]), np.log(train["price"])
if FOLDS:
    mse = -cross_val_score(model, x_train, y_train, cv=FOLDS, scoring="neg_mean_squared_error")
    print(f"{FOLDS}-fold cross-validated RMSE of log price {np.sqrt(mse.mean()):.4f}")
model.fit(x_train, y_train)
pred = np.exp(model.predict(test.drop(columns=["id"])))
pd.DataFrame({"id": test["id"], "price": pred}).to_csv("submission.csv", index=False)
