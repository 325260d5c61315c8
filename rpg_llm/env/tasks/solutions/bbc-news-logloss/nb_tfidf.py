"""BBC news: TF-IDF features and multinomial naive Bayes, class probabilities."""

import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.naive_bayes import MultinomialNB

MAX_FEATURES = 3000
ALPHA = 0.1

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
vectorizer = TfidfVectorizer(max_features=MAX_FEATURES, sublinear_tf=True, stop_words="english")
x_train = vectorizer.fit_transform(train["text"])
model = MultinomialNB(alpha=ALPHA).fit(x_train, train["category"])
proba = model.predict_proba(vectorizer.transform(test["text"]))
sub = pd.DataFrame(proba, columns=model.classes_)
sub.insert(0, "id", test["id"])
sub.to_csv("submission.csv", index=False)
