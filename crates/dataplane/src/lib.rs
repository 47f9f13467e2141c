//! nfx-dataplane (see DESIGN.md).
