//! nfx-chaining (see DESIGN.md).
