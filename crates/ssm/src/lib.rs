//! nfx-ssm (see DESIGN.md).
