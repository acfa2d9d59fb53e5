"""The paper's claims, measured: ablation studies, analyses of trained models, exact parameter counts."""
