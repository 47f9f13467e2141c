//! nfx-placement (see DESIGN.md).
