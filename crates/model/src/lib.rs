//! nfx-model (see DESIGN.md).
