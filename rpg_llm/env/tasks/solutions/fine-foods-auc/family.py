"""Fine-food reviews: word n-gram TF-IDF features and one model family picked by MODEL."""

import pandas as pd
from sklearn.decomposition import TruncatedSVD
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
from sklearn.naive_bayes import MultinomialNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline

MODEL = "knn"  # one of "hgb", "knn", "logreg", "nb", "rf"
NGRAM_MAX = 1  # word n-grams of length 1 .. NGRAM_MAX
MAX_FEATURES = 20000  # vocabulary size
C = 10.0  # logreg: inverse regularisation strength
ALPHA = 0.1  # nb: additive smoothing
N_ESTIMATORS = 1000  # rf: trees
MAX_ITER = 500  # hgb: boosting iterations
LEARNING_RATE = 0.1  # hgb
N_COMPONENTS = 200  # hgb: SVD components (the trees get dense features)
K = 25  # knn: neighbours (cosine distance)
SUBSAMPLE = 1.0  # fraction of the training rows used
FOLDS = 0  # k-fold cross-validated AUC printed before the final fit: one of 0, 3, 5 (0: none)
SEED = 0

families = {
    "hgb": lambda: make_pipeline(
        TruncatedSVD(N_COMPONENTS, random_state=SEED),
        HistGradientBoostingClassifier(
            max_iter=MAX_ITER,
            learning_rate=LEARNING_RATE,
            early_stopping=False,
            random_state=SEED,
        ),
    ),
    "knn": lambda: KNeighborsClassifier(K, metric="cosine"),
    "logreg": lambda: LogisticRegression(C=C, max_iter=2000),
    "nb": lambda: MultinomialNB(alpha=ALPHA),
    "rf": lambda: RandomForestClassifier(N_ESTIMATORS, random_state=SEED),
}
if MODEL not in families:
    raise ValueError(f"MODEL {MODEL!r} is not one of {', '.join(map(repr, sorted(families)))}")

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
if SUBSAMPLE < 1.0:
    train = train.sample(frac=SUBSAMPLE, random_state=SEED)
vectorizer = TfidfVectorizer(
    ngram_range=(1, NGRAM_MAX), max_features=MAX_FEATURES, sublinear_tf=True, min_df=2
)
model = make_pipeline(vectorizer, families[MODEL]())
if FOLDS:
    auc = cross_val_score(model, train["review"], train["great"], cv=FOLDS, scoring="roc_auc")
    print(f"{FOLDS}-fold cross-validated AUC {auc.mean():.4f}")
model.fit(train["review"], train["great"])
proba = model.predict_proba(test["review"])[:, 1]
pd.DataFrame({"id": test["id"], "great": proba}).to_csv("submission.csv", index=False)
