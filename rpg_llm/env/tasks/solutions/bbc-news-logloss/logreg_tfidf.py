"""BBC news: TF-IDF of words with multinomial logistic regression."""

import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

C = 10.0
MAX_FEATURES = 5000

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
vectorizer = TfidfVectorizer(max_features=MAX_FEATURES, sublinear_tf=True, min_df=2)
x_train = vectorizer.fit_transform(train["text"])
model = LogisticRegression(C=C, max_iter=1000).fit(x_train, train["category"])
proba = model.predict_proba(vectorizer.transform(test["text"]))
sub = pd.DataFrame(proba, columns=model.classes_)
sub.insert(0, "id", test["id"])
sub.to_csv("submission.csv", index=False)
