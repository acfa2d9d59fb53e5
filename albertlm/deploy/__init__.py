"""Deployment: the engines and the Predictor (the one path from a model to an answer), ONNX / int8 export
with its graph fusions, and the HTTP server."""
