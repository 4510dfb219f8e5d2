"""Every run normalized into one comparison: pandas frames and the markdown report, intervals from paired repeats, published figures beside measured ones, framework variants and pools."""
