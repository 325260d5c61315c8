"""Employee attrition: scaled numbers, one-hot categories, optional pairwise products of every
feature (DEGREE = 2), and one model family picked by MODEL."""

import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, PolynomialFeatures, StandardScaler

MODEL = "hgb"  # one of "hgb", "knn", "logreg", "nb", "rf"
DEGREE = 1  # 1: the features as they are; 2: also every pairwise product (about 2,600 columns)
C = 1.0  # logreg: inverse regularisation strength
MAX_ITER = 300  # hgb: boosting iterations
LEARNING_RATE = 0.1  # hgb
MAX_DEPTH = None  # hgb and rf: depth limit (None: none)
N_ESTIMATORS = 300  # rf: trees
MIN_SAMPLES_LEAF = 1  # rf: smallest leaf
K = 25  # knn: neighbours
SUBSAMPLE = 1.0  # fraction of the training rows used
FOLDS = 0  # k-fold cross-validated log loss printed before the final fit: 0, 3 or 5 (0: none)
SEED = 0

families = {
    "hgb": lambda: HistGradientBoostingClassifier(
        max_iter=MAX_ITER,
        learning_rate=LEARNING_RATE,
        max_depth=MAX_DEPTH,
        early_stopping=False,
        random_state=SEED,
    ),
    "knn": lambda: KNeighborsClassifier(K),
    "logreg": lambda: LogisticRegression(C=C, max_iter=5000),
    "nb": lambda: GaussianNB(),
    "rf": lambda: RandomForestClassifier(
        N_ESTIMATORS, max_depth=MAX_DEPTH, min_samples_leaf=MIN_SAMPLES_LEAF, random_state=SEED
    ),
}
if MODEL not in families:
    raise ValueError(f"MODEL {MODEL!r} is not one of {', '.join(map(repr, sorted(families)))}")

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
if SUBSAMPLE < 1.0:
    train = train.sample(frac=SUBSAMPLE, random_state=SEED)
features = train.drop(columns=["id", "Attrition"])
categorical = list(features.select_dtypes(exclude="number").columns)
numeric = [c for c in features.columns if c not in categorical]
steps = [
    ColumnTransformer(
        [
            ("num", StandardScaler(), numeric),
            ("cat", OneHotEncoder(handle_unknown="ignore", sparse_output=False), categorical),
        ]
    )
]
if DEGREE > 1:
    steps += [PolynomialFeatures(DEGREE, include_bias=False), StandardScaler()]
model = make_pipeline(*steps, families[MODEL]())
if FOLDS:
    loss = -cross_val_score(model, features, train["Attrition"], cv=FOLDS, scoring="neg_log_loss")
    print(f"{FOLDS}-fold cross-validated log loss {loss.mean():.4f}")
model.fit(features, train["Attrition"])
proba = model.predict_proba(test.drop(columns=["id"]))
submission = pd.DataFrame(proba, columns=model.classes_)
submission.insert(0, "id", test["id"])
submission.to_csv("submission.csv", index=False)
