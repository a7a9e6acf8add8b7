package io.sparkadaptive.shim;

/** A tiny JSON object writer: flat objects of strings, numbers and booleans. */
final class Json {
  private final StringBuilder sb = new StringBuilder(160);

  Json(String type) {
    sb.append("{\"type\":");
    quote(type);
  }

  Json str(String k, String v) {
    key(k);
    if (v == null) {
      sb.append("null");
    } else {
      quote(v);
    }
    return this;
  }

  Json num(String k, long v) {
    key(k);
    sb.append(v);
    return this;
  }

  Json dbl(String k, double v) {
    key(k);
    sb.append(Double.isFinite(v) ? Double.toString(v) : "null");
    return this;
  }

  Json bool(String k, boolean v) {
    key(k);
    sb.append(v);
    return this;
  }

  Json raw(String k, String json) {
    key(k);
    sb.append(json);
    return this;
  }

  String close() {
    return sb.append('}').toString();
  }

  private void key(String k) {
    sb.append(',');
    quote(k);
    sb.append(':');
  }

  private void quote(String s) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"': sb.append("\\\""); break;
        case '\\': sb.append("\\\\"); break;
        case '\n': sb.append("\\n"); break;
        case '\r': sb.append("\\r"); break;
        case '\t': sb.append("\\t"); break;
        default:
          if (c < 0x20) {
            sb.append(String.format("\\u%04x", (int) c));
          } else {
            sb.append(c);
          }
      }
    }
    sb.append('"');
  }
}
