//! The server token: `Authorization: Bearer <config.json's server_token>` on every request,
//! compared in constant time.

use super::http::Request;

/// Whether the request carries exactly one `Authorization` header with the right token.
pub fn authorized(req: &Request, token: &str) -> bool {
    let mut values = req.header_values("authorization");
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    let Some((scheme, given)) = value.split_once(' ') else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer") && constant_time_eq(given.as_bytes(), token.as_bytes())
}

/// Compares two byte strings in time that depends only on their lengths (the token's length
/// is no secret: 64 hex digits).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a
        .iter()
        .zip(b)
        .fold(0u8, |acc, (x, y)| acc | std::hint::black_box(x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request {
        Request {
            method: "GET".into(),
            path: "/".into(),
            query: None,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: Vec::new(),
        }
    }

    #[test]
    fn only_the_exact_token_passes() {
        let t = "ab12";
        assert!(authorized(&req(&[("authorization", "Bearer ab12")]), t));
        assert!(authorized(&req(&[("authorization", "bearer ab12")]), t));
        for bad in [
            vec![],
            vec![("authorization", "Bearer ab13")],
            vec![("authorization", "Bearer ab1")],
            vec![("authorization", "Bearer ab12 ")],
            vec![("authorization", "Basic ab12")],
            vec![("authorization", "ab12")],
            vec![
                ("authorization", "Bearer ab12"),
                ("authorization", "Bearer ab12"),
            ],
        ] {
            assert!(!authorized(&req(&bad), t), "{bad:?}");
        }
    }
}
