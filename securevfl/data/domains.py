"""Public domains of the embedded datasets' columns: what scaling may use instead of the data.

A column's min or max over the rows is one person's value; scaling by it moves every other row
when that person's row changes. Each numeric column here has a declared (lo, hi) and each
categorical its vocabulary, fixed in the code and never computed from the rows loaded; rows
outside a domain are clipped into it (row by row: no row moves another). Where the bound comes
from (docs/privacy-boundaries.md has the table):

* coding domains (public by definition): phishing {-1, 0, 1}, pixels 0..16 / 0..255, one-hot,
  adult's education-num 1..16, the census top codes (age 90, capital gain 99,999, hours 99),
  diabetes' sex {1, 2}, credit's PAY_n codes -2..9, and the documented vocabularies;
* documented ranges rounded outward (breast: the published summary table of WDBC, in scikit-
  learn's DESCR; its min/max were computed once over the 569 rows by the dataset's authors, so
  for breast the bound is as public as the documentation, not domain knowledge);
* round physiological or monetary bounds chosen from the units (diabetes' blood values, adult's
  fnlwgt and capital loss, CPS1988 wages, credit amounts), with rare rows clipped.
"""

from __future__ import annotations

import math

Domain = tuple[float, float]

# WDBC (breast): the summary table's min/max, rounded outward; the 10 features in the order
# mean, standard error, worst (scikit-learn's feature order)
_BREAST_MEAN = (
    (6.0, 30.0),  # radius
    (9.0, 40.0),  # texture
    (40.0, 190.0),  # perimeter
    (140.0, 2600.0),  # area
    (0.05, 0.17),  # smoothness
    (0.0, 0.35),  # compactness
    (0.0, 0.45),  # concavity
    (0.0, 0.21),  # concave points
    (0.1, 0.31),  # symmetry
    (0.04, 0.1),  # fractal dimension
)
_BREAST_ERROR = (
    (0.1, 2.9),
    (0.3, 4.9),
    (0.7, 22.0),
    (6.0, 550.0),
    (0.0, 0.032),
    (0.0, 0.14),
    (0.0, 0.4),
    (0.0, 0.053),
    (0.0, 0.08),
    (0.0, 0.03),
)
_BREAST_WORST = (
    (7.0, 37.0),
    (12.0, 50.0),
    (50.0, 260.0),
    (180.0, 4300.0),
    (0.07, 0.23),
    (0.0, 1.06),
    (0.0, 1.26),
    (0.0, 0.3),
    (0.15, 0.67),
    (0.05, 0.21),
)
BREAST: tuple[Domain, ...] = (*_BREAST_MEAN, *_BREAST_ERROR, *_BREAST_WORST)

# diabetes (Efron et al., unscaled): age years, sex code, BMI, mean arterial pressure (mmHg),
# six blood serum measurements (mg/dL, except s4: a ratio, s5: log of triglycerides)
DIABETES: tuple[Domain, ...] = (
    (0.0, 100.0),  # age
    (1.0, 2.0),  # sex (coded 1/2)
    (10.0, 60.0),  # bmi
    (40.0, 160.0),  # bp
    (50.0, 400.0),  # s1 total cholesterol
    (0.0, 300.0),  # s2 LDL
    (0.0, 120.0),  # s3 HDL
    (0.0, 12.0),  # s4 total / HDL
    (2.5, 7.0),  # s5 log triglycerides
    (40.0, 160.0),  # s6 glucose
)
DIABETES_TARGET: Domain = (0.0, 400.0)  # disease progression score

# UCI Adult: census coding (age > 16 by extraction, top code 90; hours 1..99; capital gain top
# code 99,999); fnlwgt and capital loss: round bounds, rare rows clipped
ADULT: dict[str, Domain] = {
    "age": (17.0, 90.0),
    "fnlwgt": (0.0, 1_500_000.0),
    "education-num": (1.0, 16.0),
    "capital-gain": (0.0, 99_999.0),
    "capital-loss": (0.0, 5_000.0),
    "hours-per-week": (1.0, 99.0),
}
# adult.names' vocabularies ('?' marks a missing value and is kept as a category)
ADULT_VOCAB: dict[str, tuple[str, ...]] = {
    "workclass": (
        "Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
        "State-gov", "Without-pay", "Never-worked", "?",
    ),
    "education": (
        "Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm",
        "Assoc-voc", "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate",
        "5th-6th", "Preschool",
    ),
    "marital-status": (
        "Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
        "Married-spouse-absent", "Married-AF-spouse",
    ),
    "occupation": (
        "Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
        "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
        "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
        "Armed-Forces", "?",
    ),
    "relationship": (
        "Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried",
    ),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
    "native-country": (
        "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
        "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba",
        "Iran", "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico",
        "Portugal", "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan",
        "Haiti", "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand",
        "Yugoslavia", "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands",
        "?",
    ),
}  # fmt: skip
ADULT_OCCUPATION_GROUPS = (
    "clerical-sales-technical", "labour-farming", "managerial-professional",
    "other-unknown", "service", "skilled-manual",
)  # fmt: skip

# CPS1988 (AER): years of education coded 0..18; potential experience = age - education - 6
# for ages 18..70; weekly wages: the sample keeps wages of at least $50, $20,000 a round cap
CPS1988: dict[str, Domain] = {"education": (0.0, 18.0), "experience": (-6.0, 64.0)}
CPS1988_VOCAB: dict[str, tuple[str, ...]] = {
    "ethnicity": ("afam", "cauc"),
    "smsa": ("no", "yes"),
    "region": ("midwest", "northeast", "south", "west"),
    "parttime": ("no", "yes"),
}
CPS1988_LOG_WAGE: Domain = (math.log(50.0), math.log(20_000.0))

# Default of Credit Card Clients (NT dollars): the codebook's PAY_n codes, round bounds for
# amounts (rare rows clipped)
CREDIT: dict[str, Domain] = {
    "LIMIT_BAL": (0.0, 1_000_000.0),
    "AGE": (18.0, 100.0),
    **{f"PAY_{i}": (-2.0, 9.0) for i in (0, 2, 3, 4, 5, 6)},
    **{f"BILL_AMT{i}": (-500_000.0, 2_000_000.0) for i in range(1, 7)},
    **{f"PAY_AMT{i}": (0.0, 2_000_000.0) for i in range(1, 7)},
}


# where each catalogue dataset's scaling bounds come from, as a DP record states it
# (``privacy.public_bounds``); the table in docs/privacy-boundaries.md gives the detail
BOUND_SOURCES = {
    "adult": "census coding (age 17..90, education-num 1..16, top codes) and round bounds for "
    "fnlwgt and capital loss; vocabularies from adult.names",
    "breast": "the published WDBC summary table (min/max per feature in scikit-learn's DESCR), "
    "rounded outward: computed once over all 569 rows by the dataset's authors, public as "
    "documentation, not independent domain knowledge",
    "cps1988": "CPS coding (education 0..18, experience -6..64) and round wage bounds",
    "credit": "PAY_n codes -2..9 and round NT-dollar bounds (rows clipped)",
    "diabetes": "round physiological bounds (age, BMI, blood pressure, serum ranges); sex {1, 2}",
    "digits": "pixel range 0..16",
    "mnist5k": "pixel range 0..255",
    "fashion-mnist": "pixel range 0..255",
    "phishing": "coding {-1, 0, 1}",
}


def bound_source(
    dataset: str,
    *,
    fitted: tuple[str, ...],
    bounds_file: str | None,
    released: tuple[int, ...] = (),
) -> str:
    """Where ``dataset``'s scaling bounds come from (a catalogue name, or a CSV run's);
    ``released``: the parties whose ranges were released under the budget."""
    if fitted:
        return "none public: " + "; ".join(fitted) + " (listed under outside_guarantee)"
    if released:
        return (
            f"released under the budget by parties {list(released)} (a noisy histogram per "
            "party on a public grid, composed into epsilon: privacy.bounds)"
            + (f"; the others declared them in --bounds {bounds_file}" if bounds_file else "")
        )
    if bounds_file is not None:
        return f"declared by the user in --bounds {bounds_file}"
    name = dataset.split(":", 1)[0]
    return BOUND_SOURCES.get(name, "the loader's declared domains (securevfl/data/domains.py)")
